import sys

from hermesctl.cli import main

sys.exit(main())
