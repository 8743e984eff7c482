"""Only for the optional C hot path; everything else is in pyproject.toml.

The extension is optional: where it cannot be built (no compiler), tuimon uses the pure-Python
ring writer (tuimon/channel/ring.py) and says so in `tuimon doctor`."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tuimon.channel._fastring", ["tuimon/channel/_fastring.c", "tuimon/channel/_phases.c",
                                                                    "tuimon/channel/_sampler.c",
                                                                    "tuimon/channel/_exitwatch.c"],
                             depends=["tuimon/channel/_fastring.h"],
                             extra_compile_args=["-O2", "-Wall"], optional=True),
                   # `tuimon inject`'s loader (tuimon/inject/_loader.c): a plain shared library loaded into a
                   # running Python by ptrace; no Python headers, Python's symbols looked up at run time
                   Extension("tuimon.inject._loader", ["tuimon/inject/_loader.c"], libraries=["dl", "pthread"],
                             extra_compile_args=["-O2", "-Wall"], optional=True)])
