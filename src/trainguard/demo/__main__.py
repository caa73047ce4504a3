import sys

from trainguard.demo import main

sys.exit(main())
