#!/bin/bash
# Megatron-LM pretraining launch for Llama-2 7B on 8 GPUs (tp 2 x pp 2 x dp 2), the benchmark
# run for mindformers_llama2_7b.yaml: same model, optimizer, precision and parallel settings.

export CUDA_DEVICE_MAX_CONNECTIONS=1

CHECKPOINT_PATH=/data/ckpt/llama2-7b-megatron
TOKENIZER_MODEL=/data/llama2/tokenizer.model
DATA_PATH=/data/wiki/llama2_text_document
TENSORBOARD_DIR=./tensorboard/llama2-7b

DISTRIBUTED_ARGS=(
    --nproc_per_node 8
    --nnodes 1
    --node_rank 0
    --master_addr localhost
    --master_port 6000
)

MODEL_ARGS=(
    --use-mcore-models
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 11008          # Megatron's --swiglu default would be 10880
    --num-attention-heads 32
    --seq-length 4096
    --max-position-embeddings 4096
    --position-embedding-type rope
    --rotary-base 10000
    --normalization RMSNorm
    --norm-epsilon 1e-5
    --swiglu
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --hidden-dropout 0.0             # Megatron defaults to 0.1; Llama has no dropout
    --attention-dropout 0.0
    --init-method-std 0.02
    --use-flash-attn
    --no-masked-softmax-fusion
    --attention-softmax-in-fp32
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 8
    --train-iters 5000
    --lr 1.0e-4
    --min-lr 1.0e-5
    --lr-decay-style cosine
    --lr-warmup-fraction 0.01
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --adam-eps 1e-8
    --clip-grad 1.0
    --bf16
    --seed 1234
    --deterministic-mode
    --recompute-granularity full
    --recompute-method uniform
    --recompute-num-layers 1
)

PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 2
    --sequence-parallel
)

DATA_ARGS=(
    --data-path $DATA_PATH
    --tokenizer-type Llama2Tokenizer
    --tokenizer-model $TOKENIZER_MODEL
    --vocab-size 32000
    --split 949,50,1
)

OUTPUT_ARGS=(
    --log-interval 1
    --log-throughput
    --save-interval 1000
    --eval-interval 1000
    --eval-iters 10
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --tensorboard-dir $TENSORBOARD_DIR
)

mkdir -p logs
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${OUTPUT_ARGS[@]} \
    2>&1 | tee logs/llama2_7b_pretrain.log
