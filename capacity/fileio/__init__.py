"""Files: bounded reading of user files, atomic writing, CSV neutralising and Parquet streams."""
