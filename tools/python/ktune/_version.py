# The library's version (runtime/ktune.h, KT_VERSION_STRING): a test holds
# the two together.
__version__ = "0.1.0"
