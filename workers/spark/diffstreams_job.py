"""spark-submit entry: `STREAMGATE_JOB_SPEC='<spec JSON>' spark-submit
workers/spark/diffstreams_job.py` (the spec in the environment: workers/spark/submit.py says
why)."""

import sys

from workers.spark.jobs import diffstreams
from workers.spark.submit import main

if __name__ == "__main__":
    sys.exit(main(diffstreams, sys.argv[1:]))
