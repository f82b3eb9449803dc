"""Floor 3: the store -- Parquet files (schemas, atomic writes, run locks), every SQL statement
(Database), selection, stored versions and lineage."""
