"""spark-submit entry: `spark-submit workers/spark/copystream_job.py '<spec JSON>'`."""

import sys

from workers.spark.jobs import copystream
from workers.spark.submit import main

if __name__ == "__main__":
    sys.exit(main(copystream, sys.argv[1:]))
