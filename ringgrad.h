// ringgrad.h — everything a user needs, in one include (the one file above every layer).
//
//   #include <ringgrad/ringgrad.h>
//   namespace rg = ringgrad;
#pragma once

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/autograd/gradcheck.h"
#include "ringgrad/core/attention.h"
#include "ringgrad/core/autocast.h"
#include "ringgrad/core/device.h"
#include "ringgrad/core/dtype.h"
#include "ringgrad/core/error.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"
#include "ringgrad/core/storage.h"
#include "ringgrad/core/tensor.h"
#include "ringgrad/core/safetensors.h"
#include "ringgrad/core/threads.h"
#include "ringgrad/core/trace.h"
#include "ringgrad/data/dataloader.h"
#include "ringgrad/data/mnist.h"
#include "ringgrad/data/sampler.h"
#include "ringgrad/nn/checkpoint.h"
#include "ringgrad/nn/functional.h"
#include "ringgrad/nn/init.h"
#include "ringgrad/nn/layers.h"
#include "ringgrad/nn/module.h"
#include "ringgrad/nn/moe.h"
#include "ringgrad/nn/transformer.h"
#include "ringgrad/optim/checkpoint.h"
#include "ringgrad/optim/grad_scaler.h"
#include "ringgrad/optim/optimizer.h"
#include "ringgrad/optim/schedule.h"
