"""Ray job entry point for ingest: `ray job submit --working-dir . -- python jobs/ingest.py ...`.

Same flags and pipeline as `lychee-ray ingest`; inside a Ray job, RAY_ADDRESS is set, so the
pipeline joins the cluster instead of starting a local one.
"""

import sys

from lychee_ray.cli import main

if __name__ == "__main__":
    sys.exit(main(["ingest", *sys.argv[1:]]))
