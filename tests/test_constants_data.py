"""The shipped NCCL data file is parsed once per process (constants.read_data);
every caller still gets the document as ``yaml.safe_load`` reads it, and its own copy."""

from importlib import resources

import yaml

from simulator import constants


def test_read_data_is_the_parsed_file_and_a_copy_each_time():
    with resources.files("simulator.data").joinpath("nccl.yaml").open() as fh:
        want = yaml.safe_load(fh)
    first = constants.read_data("nccl.yaml")
    assert first == want
    first["tuner_releases"].clear()
    first["pxn_since"] = "changed"
    assert constants.read_data("nccl.yaml") == want
