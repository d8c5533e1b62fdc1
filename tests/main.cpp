// main.cpp — the doctest runner for ringgrad's unit tests (test_*.cpp).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
