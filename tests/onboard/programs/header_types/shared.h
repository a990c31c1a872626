// What both files of the program share: the launch geometry and the step's coefficients.
#pragma once
#include <cstddef>

struct Geometry {
  int blocks;
  int threads;
};

static const float kDecay = 0.75f;

inline Geometry geometry_for(size_t n) {
  Geometry g;
  g.threads = 256;
  g.blocks = (int)((n + 255) / 256);
  return g;
}

void launch_decay(const float* in, float* out, size_t n, Geometry g, cudaStream_t s);
void launch_sharpen(const float* in, float* out, size_t n, Geometry g, cudaStream_t s);
