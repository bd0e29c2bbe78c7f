"""``python -m curator_dask``: see :mod:`curator_dask.cli.main`."""

import sys

from curator_dask.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
