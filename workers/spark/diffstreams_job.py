"""spark-submit entry: `spark-submit workers/spark/diffstreams_job.py '<spec JSON>'`."""

import sys

from workers.spark.jobs import diffstreams
from workers.spark.submit import main

if __name__ == "__main__":
    sys.exit(main(diffstreams, sys.argv[1:]))
