#include "a.cuh"
#define B 1
