/* clsrc.c -- the OpenCL C sources of cl/, embedded at build time (Makefile.am writes the byte lists). */
#include "base/bml.h"

const char bml__cl_q1_0_source[] = {
#include "card/cl_q1_0.inc"
    0};

const char bml__cl_nvidia_source[] = {
#include "card/cl_nvidia.inc"
    0};
