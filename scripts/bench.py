#!/usr/bin/env python3
"""The benchmark report (same as ``tvm-memsched bench``).

    python scripts/bench.py --out docs/bench/report          # full run (about 20 minutes on 2 cores)
    python scripts/bench.py --quick --out /tmp/quick         # a few minutes
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched.app.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench"] + sys.argv[1:]))
