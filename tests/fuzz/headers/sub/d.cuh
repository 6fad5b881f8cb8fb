#include "../a.cuh"
#include "c.cuh"
#include "e.cuh"
