//! Native VCL modules (vmods): std, directors, and friends.
