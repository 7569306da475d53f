"""voxwire code generator: spec/*.yaml to the voxwire package, its JSON Schema and docs."""
