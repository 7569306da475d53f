"""Programs written against the typed API, for tests/test_typed_api.py to type-check."""
