"""voxwire's benchmark suite: ``python -m benchmarks`` prints ratios against the peers in one run."""
