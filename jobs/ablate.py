"""Ray job entry point for the ablation grid: `ray job submit --working-dir . -- python jobs/ablate.py ...`."""

import sys

from lychee_ray.cli import main

if __name__ == "__main__":
    sys.exit(main(["ablate", *sys.argv[1:]]))
