# ruff: noqa
import sys
sys.path.insert(0, "tests")
from pathlib import Path
from conftest import write_sweep
from test_streams import ADD, REF, YAML
root = Path(sys.argv[1]); n = sys.argv[2]
d = write_sweep(root / "vm", YAML.replace("name: va", "name: vm").replace(
    "dims: [{N: 4096}]", "dims: [{N: %s}]" % n) + "methods: "
    "{compute.ilp_unroll: {params: {UNROLL: [2]}}}\n", {"ref.py": REF, "add.cpp": ADD})
print(d)
