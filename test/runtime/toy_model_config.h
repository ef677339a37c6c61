/*===- toy_model_config.h - Sizes of the toy model (C and C++) ---*- C -*-===*/
#ifndef KIMI_TEST_RUNTIME_TOY_MODEL_CONFIG_H
#define KIMI_TEST_RUNTIME_TOY_MODEL_CONFIG_H

#define TOY_VOCAB 16   /* V */
#define TOY_HIDDEN 32  /* D, one MXFP4 block */
#define TOY_EXPERTS 2  /* E */

#endif
