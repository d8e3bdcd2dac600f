import sys

from hermesd.daemon.main import main

sys.exit(main())
