/* PLACEHOLDER: the message pipeline, being written. */
#include "internal.h"
