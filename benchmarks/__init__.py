"""voxwire's benchmarks: ``python -m benchmarks`` prints ratios against the peers in one run."""
