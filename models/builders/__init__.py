"""The zoo's builders, one family per module; `models/build.py` gathers them into the zoo."""
