// The main of the doctest programs that need no set-up of their own: run the test cases
// selected by the command line (doctest's own options).
#include <doctest/doctest.h>

int main(int argc, char** argv) { return doctest::Context(argc, argv).run(); }
