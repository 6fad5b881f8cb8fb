#pragma once
#include "b.cuh"
#include <c.cuh>
#include "sub/d.cuh"
