"""leadwire.fleet: the PySpark fleet analytics job."""
