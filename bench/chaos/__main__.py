import sys

from bench.chaos.campaign import main

sys.exit(main())
