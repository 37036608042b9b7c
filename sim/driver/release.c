/* The driver release this copy of the library is built as: GMTSIM_RELEASE, set
 * by the build for each library (sim/driver/meson.build). */
#include "sim.h"

const int gmtsim__release = GMTSIM_RELEASE;
