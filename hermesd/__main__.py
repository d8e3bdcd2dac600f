import sys

from hermesd.daemon import main

sys.exit(main())
