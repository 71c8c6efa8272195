"""The bottom floor: closed vocabularies, the clinical threshold table, the judge's answer
models and the stored stages, the score types, the record format with its versions and
migrations, and the control strings. Pure: no I/O but reading the package's own table.
"""
