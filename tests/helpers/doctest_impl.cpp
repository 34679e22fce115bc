// doctest's implementation, compiled once and linked into every doctest program (each
// program used to compile its own copy; under AddressSanitizer that copy alone took about a
// minute of compile time per program). Programs with a main of their own link this; the
// others also link doctest_main.cpp.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
