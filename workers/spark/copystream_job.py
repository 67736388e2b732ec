"""spark-submit entry: `STREAMGATE_JOB_SPEC='<spec JSON>' spark-submit
workers/spark/copystream_job.py` (the spec in the environment: workers/spark/submit.py says
why)."""

import sys

from workers.spark.jobs import copystream
from workers.spark.submit import main

if __name__ == "__main__":
    sys.exit(main(copystream, sys.argv[1:]))
