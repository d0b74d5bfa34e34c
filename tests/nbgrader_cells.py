"""Notebooks for nbgrader tests: cells with nbgrader's metadata, in a Python 3 notebook."""
from nbformat.v4 import new_code_cell, new_notebook

ANSWER = "def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION"


def nbgrader_meta(grade_id, **kw):
    """Cell metadata as nbgrader's create-assignment toolbar writes it (schema 3)."""
    md = {"grade_id": grade_id, "solution": False, "grade": False, "locked": False, "schema_version": 3, "task": False}
    md.update(kw)
    return {"nbgrader": md}


def adding_notebook(first, *tests):
    """A Python notebook: the markdown cell ``first``, the answer cell ``add``, then ``tests``."""
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.cells = [first, new_code_cell(ANSWER, metadata=nbgrader_meta("add", solution=True), id="answer"), *tests]
    return nb
