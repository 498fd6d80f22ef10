/* PLACEHOLDER: SEIPD v1 / SED, being written. */
#include "pgp/seipd.h"
