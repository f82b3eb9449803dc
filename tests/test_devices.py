"""Device placement on a cluster: slots per node and class, build routing per platform."""

import os
import platform

import pytest

from kopt.run.devices import Node, Slot, build_nodes, plan_slots


def _nodes():
    return [Node("h", "192.0.2.1", {"CPU": 16}, "x86_64"),
            Node("g", "192.0.2.2", {"CPU": 32, "GPU": 2, "kopt_class_h200": 1}, "x86_64"),
            Node("j", "192.0.2.3", {"CPU": 8, "GPU": 1, "kopt_class_orin": 1}, "aarch64"),
            Node("c", "192.0.2.4", {"CPU": 4, "kopt_class_epyc": 1}, "x86_64")]


def test_cuda_slots_one_per_gpu_with_the_declared_class():
    slots = plan_slots(_nodes(), "cuda", 1)
    assert slots == [Slot("g", "h200", 0), Slot("g", "h200", 1), Slot("j", "orin", 0)]


def test_cpu_slots_only_on_nodes_that_declare_a_class():
    assert plan_slots(_nodes(), "cpu", 2) == [Slot("c", "epyc", 0), Slot("c", "epyc", 1),
                                               Slot("g", "h200", 0), Slot("g", "h200", 1),
                                               Slot("j", "orin", 0), Slot("j", "orin", 1)]
    # nobody declares a class (the embedded instance): anywhere, hardware-derived class
    plain = [Node("h", "1", {"CPU": 2}, "x86_64")]
    assert plan_slots(plain, "cpu", 3) == [Slot(None, None, k) for k in range(3)]
    with pytest.raises(ValueError):
        plan_slots(plain, "cpu", 0)


def test_builds_routed_by_platform_only_on_a_mixed_cluster():
    assert build_nodes([n for n in _nodes() if n.platform == "x86_64"], {"x86_64"}) is None
    routes = build_nodes(_nodes(), {"x86_64", "aarch64"})
    assert routes == {"aarch64": ["j"], "x86_64": ["h", "g", "c"]}
    with pytest.raises(ValueError, match="aarch64"):
        build_nodes([n for n in _nodes() if n.platform == "x86_64"], {"aarch64"})


def test_the_arch_of_local_gpus_is_read_before_any_device_starts(tmp_path, monkeypatch):
    """nvidia-smi's compute capability, filtered like CUDA_VISIBLE_DEVICES (index or UUID
    prefix); a one-node run's build target is known from it, a mixed or unknown one is not."""
    from kopt.run.devices import Node, local_compute_caps, predicted_target

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat <<'X'\n0, GPU-1111aaaa-0000, 9.0\n1, GPU-2222bbbb-0000, 8.7\n"
                   "2, GPU-3333cccc-0000, 9.0\nX\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert local_compute_caps("") is None  # nothing visible
    assert local_compute_caps("0,2") == [90, 90]
    assert local_compute_caps("GPU-2222") == [87]
    assert local_compute_caps("5") is None  # an index nvidia-smi does not list
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert local_compute_caps() == [90, 87, 90]
    here = [Node("n1", "127.0.0.1", {"GPU": 3.0}, platform.machine())]
    assert predicted_target("cuda", here) is None  # two archs: wait for the devices
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert predicted_target("cuda", here) == {"sm": 90, "platform": platform.machine()}
    assert predicted_target("cpu", here) == {"sm": None, "platform": platform.machine()}
    two = here + [Node("n2", "192.0.2.7", {"GPU": 1.0}, "aarch64")]
    assert predicted_target("cuda", two) is None  # a cluster: the devices report their own
