"""Ray job entry point for evaluate: `ray job submit --working-dir . -- python jobs/evaluate.py ...`."""

import sys

from lychee_ray.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate", *sys.argv[1:]]))
