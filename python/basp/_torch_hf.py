"""BASP attention as a Hugging Face transformers attention backend: register_hf_attention (basp.torch re-exports it).

    register_hf_attention(comm)                    # once, on every rank, before the model runs
    config = LlamaConfig(..., attn_implementation="basp")
    model = LlamaForCausalLM(config)               # same seed (or the same weights) on every rank
    logits = model(input_ids=local_ids, position_ids=global_positions, use_cache=False).logits

Each rank feeds its shard of the micro-batch (basp.data.local_shard of the [B, S] token ids, comm.query(S)):
B/G sequences, tokens [token_begin, token_end) of each. Everything outside attention (embeddings, norms, MLPs, the
LM head) works per token and needs nothing; the attention layers call the function registered here, which runs
basp.torch.BaspAttention on the rank's Q, K, V, so that every query sees its whole sequence.

What transformers hands the function, and what it does with it (transformers 5: AttentionInterface):
  fn(module, query, key, value, attention_mask, scaling=..., dropout=..., **kwargs) -> (attn_output, None), with
  query and key [b, Hq / Hkv, S_l, D] after RoPE and value [b, Hkv, S_l, Dv]; attn_output [b, S_l, Hq, Dv], which
  the caller reshapes to [b, S_l, Hq * Dv]. The layer's heads (Hq, Hkv: GQA and MQA included, any ratio
  BaspAttention takes) and head sizes come from those shapes: Dv differs from D in multi-head latent attention
  (DeepSeek-V2/V3, whose key arrives with its rotary part already broadcast to every head). One BaspAttention (and
  its plans) per (Hq, Hkv, D, Dv), made on first use.
  `scaling` is honoured (the local attention is SDPA with scale=scaling).

Masking. The attention is causal over the whole sequence, applied after the head scatter, where each rank holds whole
sequences: HF's local [S_l, S_l] mask would be wrong there, so a mask function is registered under the same name
(AttentionMaskInterface) that builds none. It returns None for the plain causal mask with no padding and refuses,
with basp.Error, what this backend cannot honour: a padding mask (a 2-D attention_mask with a zero), packed
sequences (position_ids that restart inside a shard; packed documents take BaspAttention's THD layout instead),
sliding windows, extra mask functions and bidirectional attention. An explicit 4-D mask that reaches the attention
function is refused too. Without the mask registration transformers would drop a 2-D padding mask silently.

RoPE. transformers rotates Q and K with the position_ids the model is called with, before attention; they default
to 0..S_l-1 on every rank, which is wrong for every shard but the first. Pass the global positions of the rank's
tokens (torch.arange(info.token_begin, info.token_end)). With check_positions (the default) the function compares
them with comm.query(S) at the first layer (layer_idx 0, one host read per forward) and refuses others.

Refused with basp.Error as well: dropout > 0 (HF passes config.attention_dropout while training: set it to 0), a KV
cache holding earlier tokens (generation; call the model with use_cache=False when training), softcap, sinks and
position biases. All these checks read only the rank's own arguments: a rank that fails them raises while the
others of its group may already wait in the exchange (mpirun ends the job when the raising rank exits).

S, the full sequence length, is S_l * K by default (K = comm.group_size); when K does not divide S pass it, as
seq_len here or per call as the model keyword basp_seq_len=S (transformers hands model keywords down to attention).

The function registered is process-wide (transformers keeps one registry per process): one comm per name.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from ._torch_attention import BaspAttention
from .comm import Comm, RankInfo
from .errors import invalid_argument

# fn(q, k, v, causal, scale) -> out on head-sharded [b, h, S, D] tensors (K/V heads already expanded to q's).
ScaledAttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool, Optional[float]], torch.Tensor]

_WHERE = "basp.torch.register_hf_attention"
# Attention keywords of transformers models that change the attention itself; this backend has none of them.
_UNSUPPORTED_KWARGS = ("softcap", "sliding_window", "s_aux", "sinks", "position_bias", "cu_seq_lens_q",
                       "cu_seq_lens_k")


def sdpa_scaled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                          scale: Optional[float]) -> torch.Tensor:
    """PyTorch's scaled_dot_product_attention with the layer's scale (None: 1/sqrt(D))."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


class HFAttention:
    """The attention function (and mask function) that register_hf_attention registers with transformers.

    Callable as transformers' AttentionInterface expects; `mask` is the AttentionMaskInterface entry. `layers`
    holds one BaspAttention per (Hq, Hkv, D, Dv) seen; close() destroys their plans (not collective)."""

    def __init__(self, comm: Comm, name: str, seq_len: Optional[int], attention: ScaledAttentionFn,
                 check_positions: bool) -> None:
        self.comm = comm
        self.name = name
        self.where = "basp attention %r" % name
        self.seq_len = seq_len
        self.attention = attention
        self.check_positions = check_positions
        self.layers: Dict[Tuple[int, int, int, int], BaspAttention] = {}
        self._shards: Dict[int, RankInfo] = {}
        self._scale: Optional[float] = None

    def _local_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
        # BaspAttention's fn(q, k, v, causal): the scale is the one of the call in progress (autograd keeps what
        # the forward used, so the backward never calls back here).
        return self.attention(q, k, v, causal, self._scale)

    def layer(self, num_heads: int, num_kv_heads: int, head_dim: int,
              v_head_dim: Optional[int] = None) -> BaspAttention:
        """The causal BaspAttention for (Hq, Hkv, D, Dv) (Dv None: D), made on first use (its plans: on its first
        forward)."""
        key = (int(num_heads), int(num_kv_heads), int(head_dim), int(head_dim if v_head_dim is None else v_head_dim))
        if key not in self.layers:
            self.layers[key] = BaspAttention(self.comm, key[0], key[2], num_kv_heads=key[1], causal=True,
                                             attention=self._local_attention, v_head_dim=key[3])
        return self.layers[key]

    def shard(self, seq_len: int) -> RankInfo:
        """comm.query(seq_len), kept."""
        if seq_len not in self._shards:
            self._shards[seq_len] = self.comm.query(seq_len)
        return self._shards[seq_len]

    def _seq_len(self, local_tokens: int, override: Any) -> int:
        seq_len = override if override is not None else self.seq_len
        if seq_len is None:
            return local_tokens * self.comm.group_size
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
            raise invalid_argument("%s: basp_seq_len (%r) must be a positive int, the full sequence length S" % (
                self.where, seq_len))
        return seq_len

    def _check_positions(self, module: Any, position_ids: Any, info: RankInfo) -> None:
        if not self.check_positions or position_ids is None or getattr(module, "layer_idx", 0) not in (0, None):
            return
        if not isinstance(position_ids, torch.Tensor) or position_ids.dim() not in (1, 2) or not position_ids.shape[-1]:
            return  # not the [b, S_l] ids of a text model (e.g. multimodal RoPE), or no token: left to the model
        ends = position_ids[..., [0, -1]].reshape(-1, 2).tolist()
        expected = [info.token_begin, info.token_end - 1]
        if any(row != expected for row in ends):
            raise invalid_argument(
                "%s: position_ids (first/last %r) are not this rank's global token positions [%d, %d) of S=%d: "
                "call the model with position_ids=torch.arange(%d, %d) (RoPE needs the global positions; "
                "check_positions=False turns this check off)" % (
                    self.where, ends[0], info.token_begin, info.token_end, info.seq_len, info.token_begin,
                    info.token_end))

    def __call__(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: Optional[torch.Tensor], scaling: Optional[float] = None, dropout: float = 0.0,
                 **kwargs: Any) -> Tuple[torch.Tensor, None]:
        where = self.where
        for arg, x in (("query", query), ("key", key), ("value", value)):
            if not isinstance(x, torch.Tensor) or x.dim() != 4:
                raise invalid_argument("%s: %s (%s) must be a 4-d tensor [b, heads, S_l, D]" % (
                    where, arg, tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__))
        b, hq, s_l, d = query.shape
        if key.shape[:3] != value.shape[:3] or key.shape[0] != b or key.shape[3] != d:
            raise invalid_argument("%s: key %s and value %s do not match query %s ([b, heads, S_l, D]; value's "
                                   "head size may differ)" % (where, tuple(key.shape), tuple(value.shape),
                                                              tuple(query.shape)))
        if key.shape[2] != s_l:
            raise invalid_argument("%s: key has %d tokens, query %d: a KV cache with earlier tokens (generation) is "
                                   "not supported; call the model with use_cache=False" % (where, key.shape[2], s_l))
        if attention_mask is not None:
            raise invalid_argument("%s: attention_mask (a %s) is not None: the causal mask over the whole sequence "
                                   "is applied inside, and other masks (padding, 4-D masks) are not supported" % (
                                       where, tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor)
                                       else type(attention_mask).__name__))
        if dropout is not None and float(dropout) > 0.0:
            raise invalid_argument("%s: dropout (%g) is not supported: set config.attention_dropout = 0" % (
                where, float(dropout)))
        if kwargs.get("is_causal") is False or getattr(module, "is_causal", True) is False:
            raise invalid_argument("%s: is_causal (False): only causal attention is supported" % where)
        for name in _UNSUPPORTED_KWARGS:
            if kwargs.get(name) is not None:
                raise invalid_argument("%s: %s (%r) is not supported by BASP attention" % (
                    where, name, kwargs[name] if not isinstance(kwargs[name], torch.Tensor)
                    else "a tensor %s" % (tuple(kwargs[name].shape),)))
        seq_len = self._seq_len(s_l, kwargs.get("basp_seq_len"))
        info = self.shard(seq_len)
        if info.token_end - info.token_begin != s_l or info.num_sequences != b:
            raise invalid_argument("%s: query holds %d sequences of %d tokens, but this rank's shard of the "
                                   "micro-batch (B=%d, S=%d) is %d sequences of tokens [%d, %d): feed "
                                   "basp.data.local_shard(batch, comm.query(S)), and pass seq_len (or basp_seq_len) "
                                   "when K=%d does not divide S" % (
                                       where, b, s_l, info.micro_batch, seq_len, info.num_sequences,
                                       info.token_begin, info.token_end, self.comm.group_size))
        self._check_positions(module, kwargs.get("position_ids"), info)
        layer = self.layer(hq, key.shape[1], d, value.shape[3])
        self._scale = None if scaling is None else float(scaling)
        # [b, H, S_l, D] -> BSHD [b, S_l, H, D] (views; the exchange makes them contiguous).
        out = layer(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), seq_len=seq_len)
        return out, None

    def mask(self, batch_size: int, q_length: int, kv_length: int, q_offset: Any = 0, kv_offset: Any = 0,
             mask_function: Optional[Callable[..., Any]] = None, attention_mask: Optional[torch.Tensor] = None,
             **kwargs: Any) -> None:
        """The AttentionMaskInterface entry: no mask (None) for the plain causal one, basp.Error for the rest."""
        from transformers.masking_utils import causal_mask_function

        if mask_function is not causal_mask_function:
            raise invalid_argument(
                "%s: mask_function (%s) is not the plain causal mask: BASP attention applies the causal mask over "
                "the whole sequence and supports no other (sliding windows, packed sequences detected from "
                "position_ids that restart inside a shard, extra mask functions, bidirectional attention)" % (
                    self.where, getattr(mask_function, "__qualname__", repr(mask_function))))
        if isinstance(attention_mask, torch.Tensor) and not bool(attention_mask.all()):
            raise invalid_argument("%s: attention_mask (%s, with zeros) is a padding mask, which BASP attention "
                                   "does not support: the causal mask over the whole sequence is applied inside" % (
                                       self.where, tuple(attention_mask.shape)))
        return None

    def close(self) -> None:
        """Destroys the plans of every layer made so far (not collective)."""
        for layer in self.layers.values():
            layer.close()
        self.layers.clear()


def register_hf_attention(comm: Comm, name: str = "basp", seq_len: Optional[int] = None,
                          attention: Optional[ScaledAttentionFn] = None,
                          check_positions: bool = True) -> HFAttention:
    """Registers BASP attention with Hugging Face transformers as attn_implementation `name` (and a mask function
    under the same name that builds no mask); returns the registered HFAttention. Not collective: the plans are
    made, collectively over each group, on the first forward.

    comm             the basp.Comm every rank feeds its shard with (comm.query(S))
    name             the attn_implementation to select: LlamaConfig(..., attn_implementation=name)
    seq_len          S, the full sequence length (default: S_l * K); per call, the model keyword basp_seq_len
    attention        fn(q, k, v, causal, scale) -> out on head-sharded [b, h, S, D] tensors (default: SDPA)
    check_positions  compare position_ids with this rank's token range at layer 0 (RoPE needs global positions)

    Registering again under the same name replaces the function (and its comm) for every model of the process.
    Needs transformers 5 (AttentionInterface, AttentionMaskInterface).
    """
    if not isinstance(comm, Comm):
        raise invalid_argument("%s: comm (a %s) is not a basp.Comm" % (_WHERE, type(comm).__name__))
    if not isinstance(name, str) or not name or "|" in name:
        raise invalid_argument("%s: name (%r) must be a non-empty str without '|'" % (_WHERE, name))
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0):
        raise invalid_argument("%s: seq_len (%r) must be a positive int or None" % (_WHERE, seq_len))
    if attention is not None and not callable(attention):
        raise invalid_argument("%s: attention (a %s) is not callable" % (_WHERE, type(attention).__name__))
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as e:
        raise invalid_argument("%s: transformers 5 (AttentionInterface, AttentionMaskInterface) is not importable "
                               "(%s)" % (_WHERE, e)) from None
    existing = AttentionInterface._global_mapping.get(name)
    if name == "eager" or (existing is not None and not isinstance(existing, HFAttention)):
        raise invalid_argument("%s: name (%r) is one of transformers' own attention implementations; choose "
                               "another (e.g. \"basp\")" % (_WHERE, name))
    fn = HFAttention(comm, name, seq_len,
                     attention if attention is not None else sdpa_scaled_attention, bool(check_positions))
    AttentionInterface.register(name, fn)
    AttentionMaskInterface.register(name, fn.mask)
    return fn
