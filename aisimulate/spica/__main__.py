import sys

from aisimulate.spica.cli import main

sys.exit(main())
