import sys

from aisimulate.replay.cli import main

sys.exit(main())
