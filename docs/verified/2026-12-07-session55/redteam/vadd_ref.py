# ruff: noqa
def reference(x, y, N):
    return (x.double() + y.double()).float()
