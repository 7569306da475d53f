"""The conformance cases, built from the spec for :mod:`codegen.vectors`.

- :mod:`.validator`: a second, independent reading of the spec's rules, which judges every case;
- :mod:`.base`: the case list and how a case is written;
- :mod:`.messages`: each message's examples and wrong senders, unknown types, the message size
  limit, malformed texts;
- :mod:`.fields`: each object's fields (missing, null, wrong types) and rules across fields;
- :mod:`.limits`: the boundary pair of each limit of a field;
- :mod:`.frames`: the binary frames' examples, sizes and header fields.
"""

__all__: list[str] = []
