// The dependency of the missing-dependency test plugin; the test runs that plugin from a copy
// where this library cannot be found.
extern "C" __attribute__((visibility("default"))) int nibble_test_ghost_function() { return 7; }
