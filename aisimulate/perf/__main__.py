import sys

from aisimulate.perf.cli import main

sys.exit(main())
