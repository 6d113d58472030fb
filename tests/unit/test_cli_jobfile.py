"""YAML job files: the API's fields plus cpu/memory quantities; whatever is wrong names the file and line."""
import pytest

from tidal_cli import jobfile

GOOD = """\
name: resnet50
department: ml-search
image: registry/resnet:1
command: [python, train.py, --epochs, 90, "--note=a b"]
framework: pytorch-2.1
gpu_model: T4
gpus: 0.5
cpu: 4000m
memory: 16Gi
workers: 1
"""


def test_a_job_file_becomes_the_apis_fields_with_their_lines():
    job = jobfile.parse(GOOD, "job.yaml")
    assert job.payload == {
        "name": "resnet50", "department": "ml-search", "image": "registry/resnet:1",
        "command": "python train.py --epochs 90 '--note=a b'", "framework": "pytorch-2.1", "gpu_model": "T4",
        "gpus": 0.5, "cpu_milli": 4000, "memory_mib": 16384, "workers": 1,
    }
    assert job.where("gpus") == "job.yaml:7" and job.where("memory_mib") == "job.yaml:9"


def test_the_apis_own_units_pass_as_they_are():
    job = jobfile.parse("cpu_milli: 250\nmemory_mib: 512\ngpus: '1'\n")
    assert job.payload == {"cpu_milli": 250, "memory_mib": 512, "gpus": "1"}


@pytest.mark.parametrize("text, message", [
    ("name: a\nimage: [unclosed\n", r"^job.yaml:3: not valid YAML"),  # the scanner reaches the end of the file
    ("name: a\n  image: b\n", r"^job.yaml:2: not valid YAML: mapping values are not allowed here"),
    ("name: a\n\tgpus: 1\n", r"^job.yaml:2: not valid YAML"),
    ("name: a\ngpu: 1\n", r"^job.yaml:2: unknown field 'gpu' \(known: name, "),
    ("name: a\ncpu: 4 cores\n", r"^job.yaml:2: cpu: '4 cores' is not a quantity"),
    ("memory: 16Gi\nname: a\nmemory_mib: 10\n", r"^job.yaml:3: memory_mib repeats memory_mib \(or memory\) "
                                                 r"\(line 1\)"),
    ("- name: a\n", r"^job.yaml:1: a job file is a mapping of fields"),
    ("", r"^job.yaml: empty"),
    ("name: a\n---\nname: b\n", r"^job.yaml:2: not valid YAML: expected a single document in the stream but found "
                                r"another"),
    ("command: [python, {a: 1}]\n", r"^job.yaml:1: command: a string, or a list of words"),
    ("? [a, b]\n: 1\n", r"^job.yaml:1: unknown field \['a', 'b'\]"),
])
def test_a_malformed_file_names_the_line(text, message):
    with pytest.raises(jobfile.JobFileError, match=message):
        jobfile.parse(text, "job.yaml")


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(jobfile.JobFileError, match=r"nope.yaml: cannot read it"):
        jobfile.load(tmp_path / "nope.yaml")


def test_the_documented_example_parses():
    job = jobfile.parse(jobfile.EXAMPLE)
    assert job.payload["cpu_milli"] == 4000 and job.payload["memory_mib"] == 16384
