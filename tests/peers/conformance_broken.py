"""A deliberately broken conformance testee, to prove the runner reports each fault by case id.

It answers like voxwire (``voxwire.conformance.answer``) except for the cases whose id contains:

- ``/wrong-code``: another error code;
- ``/wrong-value``: a valid answer with another value;
- ``/garbage``: a line that is not JSON;
- ``/out-of-turn``: an answer for another id;
- ``/hang``: no answer (it sleeps);
- ``/crash``: it writes to stderr and exits with status 3.
"""

from __future__ import annotations

import json
import sys
import time

from voxwire.conformance import answer


def main() -> int:
    for line in sys.stdin:
        request = json.loads(line)
        case_id = request["id"]
        got = answer(request)
        if "/crash" in case_id:
            print("conformance_broken: crashing on purpose", file=sys.stderr, flush=True)
            return 3
        if "/hang" in case_id:
            time.sleep(60)
        if "/garbage" in case_id:
            print("this is not JSON", flush=True)
            continue
        if "/out-of-turn" in case_id:
            got["id"] = "some/other/id"
        if "/wrong-code" in case_id:
            got = {"id": case_id, "valid": False, "code": "no_such_code"}
        if "/wrong-value" in case_id:
            got = {**got, "value": {"type": got.get("type"), "surprise": True}}
        print(json.dumps(got), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
