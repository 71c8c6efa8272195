"""files/inputs.py: wrong columns, CSV in a .jsonl file and broken lines are refused naming
the columns found, the flags that map them, and the line."""

import pytest
from builders import write_jsonl


def test_wrong_json_columns_are_refused_naming_the_columns_and_flags(tmp_path):
    from radmatch_audit.files.inputs import InputError, check_input, read_pairs

    path = write_jsonl(tmp_path / "pairs.jsonl", [
        {"ground_truth": "Small effusion.", "generated": "No effusion.", "id": str(i)} for i in range(3)])
    with pytest.raises(InputError) as caught:
        check_input(path)
    message = str(caught.value)
    assert "no column 'reference', 'candidate'" in message
    assert "columns found in its first 3 JSON lines: 'ground_truth', 'generated', 'id'" in message
    assert "--reference-column NAME and --candidate-column NAME" in message
    assert "effusion" not in message  # values are report text: never in a message
    rows = list(read_pairs(path, columns={"reference": "ground_truth", "candidate": "generated"}))
    assert [pair.reference for _, pair in rows] == ["Small effusion."] * 3


def test_a_row_missing_a_column_among_good_rows_is_still_one_row_problem(tmp_path):
    from radmatch_audit.files.inputs import RowProblem, check_input, read_pairs

    path = write_jsonl(tmp_path / "pairs.jsonl", [
        {"reference": "A.", "candidate": "B."}, {"reference": "A."}, {"reference": "C.", "candidate": "D."}])
    check_input(path)
    items = [item for _, item in read_pairs(path)]
    assert isinstance(items[1], RowProblem) and "candidate" in items[1].message
    assert not isinstance(items[0], RowProblem) and not isinstance(items[2], RowProblem)


def test_csv_content_in_a_jsonl_file_is_called_csv(tmp_path):
    from radmatch_audit.files.inputs import InputError, check_input

    path = tmp_path / "pairs.jsonl"
    path.write_text('reference,candidate\n"Small effusion.","No effusion."\n"A, b.","C."\n')
    with pytest.raises(InputError, match=r"looks like CSV, not JSON lines: its first line has 2 "
                       r"comma-separated fields \('reference', 'candidate'\).*name it \.csv"):
        check_input(path)
    headerless = tmp_path / "rows.jsonl"
    headerless.write_text('"Small right effusion.","No effusion."\n')
    with pytest.raises(InputError, match="looks like CSV") as caught:
        check_input(headerless)
    assert "effusion" not in str(caught.value)  # a first line of report text is not quoted


def test_broken_json_lines_are_still_row_problems(tmp_path):
    from radmatch_audit.files.inputs import RowProblem, read_pairs

    path = tmp_path / "pairs.jsonl"
    path.write_text('{"reference": "A.", "candidate": "B."}\n{"reference": "A.", \n')
    items = [item for _, item in read_pairs(path)]
    assert isinstance(items[1], RowProblem) and "invalid JSON" in items[1].message
