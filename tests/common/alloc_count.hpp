// Host allocations made by the calling thread through operator new (tests/api/alloc_count.cpp
// replaces it), so a test can check that a call allocates nothing.
#pragma once

long allocations_on_this_thread();
