"""The argument parser every ``python -m aisimulate.*`` command uses."""

from __future__ import annotations

import argparse
from typing import NoReturn


class CliParser(argparse.ArgumentParser):
    """Usage errors exit 2 with one line, like every other user mistake."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see --help)\n")
