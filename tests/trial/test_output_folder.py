"""The output folder of `run --try` and `tune` (trial/folders.prepare_output_folder): a new or empty one,
or with --force an earlier folder of the same kind; never anything else, never a traceback."""

import pytest

from ddpdoctor.errors import InputError
from ddpdoctor.trial.folders import prepare_output_folder


@pytest.mark.parametrize("marker,kind", [("trial.json", "trial"), ("tune.json", "tune folder")])
def test_only_an_earlier_folder_of_the_same_kind_is_replaced(tmp_path, marker, kind):
    target = tmp_path / "out"
    prepare_output_folder(target, False, marker, kind)  # new: created
    assert target.is_dir()
    (target / "keep.txt").write_text("user data")
    with pytest.raises(InputError, match="already exists"):
        prepare_output_folder(target, False, marker, kind)
    with pytest.raises(InputError, match=f"not a ddpdoctor {kind} \\(no {marker}\\); refusing to delete"):
        prepare_output_folder(target, True, marker, kind)
    assert (target / "keep.txt").read_text() == "user data"  # nothing the user gave was touched
    (target / marker).write_text("{}")
    prepare_output_folder(target, True, marker, kind)  # an earlier one of ours: replaced
    assert target.is_dir() and not any(target.iterdir())


def test_a_file_is_not_a_folder(tmp_path):
    f = tmp_path / "out"
    f.write_text("x")
    with pytest.raises(InputError, match="exists and is not a folder"):
        prepare_output_folder(f, True, "tune.json", "tune folder")
