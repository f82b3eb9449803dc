"""Where ``ray.init`` spends its seconds on this host: kopt's embedded-instance arguments
(kopt.run.cluster ``ensure_ray``), one actor call after it, under cProfile; the 25 largest
cumulative entries. Usage: python3 THIS [LABEL]"""
import cProfile
import pstats
import sys
import time

import ray

t0 = time.perf_counter()
pr = cProfile.Profile()
pr.enable()
ray.init(address="local", include_dashboard=False, logging_level="ERROR", log_to_driver=False)
pr.disable()
t1 = time.perf_counter()


@ray.remote(num_cpus=0)
class A:
    def f(self):
        return 1


ray.get(A.remote().f.remote())
t2 = time.perf_counter()
print(f"{sys.argv[1:]}: ray.init {t1 - t0:.2f} s, first actor call {t2 - t1:.2f} s")
pstats.Stats(pr).sort_stats("cumulative").print_stats(25)
ray.shutdown()
