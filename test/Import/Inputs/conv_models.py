#!/usr/bin/python3
"""conv_models.py OUT_DIR: convolutions as torch exports them, with inputs and
torch's outputs as .npy files beside each model:

  - vit.onnx: a vision transformer (nn.Conv2d patch embedding with kernel =
    stride = 8 on 36 x 36 images, whose last 4 rows and columns no patch
    covers; a class token, learned positions, two pre-norm
    nn.TransformerEncoderLayers, a classifier on the class token);
    vit_pixels.npy -> vit_logits.npy;
  - convs.onnx: the other kinds, one output each (conv_inputs_N.npy ->
    conv_outputs_N.npy):
      0. Whisper's audio stem: Conv1d(k=3, padding=1), GELU, Conv1d(k=3,
         stride=2, padding=1), GELU;
      1. Mamba's causal depthwise Conv1d (groups = channels, padding k - 1,
         the first T positions kept);
      2. a grouped, dilated, strided Conv2d without bias, padding one axis;
      3. a video transformer's tubelets: Conv3d with kernel = stride (2, 4, 4);
  - shortconv.onnx: a language model whose blocks mix each channel over the
    last 3 positions (a causal depthwise Conv1d, as Hyena's and Mamba's short
    convolutions) and the sequence through a dense causal Conv1d (k = 2)
    before attention; exported for training (no constant folding, so its
    parameters are the module's), tokens.npy -> shortconv_logits.npy;
  - padconv.onnx: the same with the convolutions' other paddings
    (padding_mode 'replicate' before the depthwise one, 'reflect' around
    the dense one: ONNX Pad in modes edge and reflect), tokens.npy ->
    padconv_logits.npy.

conv_models.py OUT_DIR --train DATA STEPS LR [padconv]: torch's losses of
STEPS AdamW steps of shortconv's (or padconv's) module on weft train's
windows of DATA, in OUT_DIR/torch_losses.txt.
"""
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

warnings.filterwarnings("ignore")
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)


class ViT(nn.Module):
    def __init__(self, image=36, patch=8, channels=3, d=32, heads=4, layers=2,
                 classes=10):
        super().__init__()
        self.patch = nn.Conv2d(channels, d, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0,
                                           activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, pixels):
        x = self.patch(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.encoder(x)[:, 0]))


class Convs(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem1 = nn.Conv1d(8, 16, 3, padding=1)
        self.stem2 = nn.Conv1d(16, 16, 3, stride=2, padding=1)
        self.causal = nn.Conv1d(6, 6, 4, groups=6, padding=3)
        self.grouped = nn.Conv2d(4, 6, (3, 2), stride=(2, 1), dilation=(1, 2),
                                 padding=(1, 0), groups=2, bias=False)
        self.tubelets = nn.Conv3d(3, 5, (2, 4, 4), stride=(2, 4, 4))

    def forward(self, audio, sequence, image, video):
        stem = nn.functional.gelu(self.stem2(nn.functional.gelu(self.stem1(audio))))
        causal = self.causal(sequence)[..., :sequence.shape[-1]]
        return stem, causal, self.grouped(image), self.tubelets(video)


VOCAB, HIDDEN, HEADS, BATCH, SEQ = 48, 24, 4, 2, 8


class ShortConvLM(nn.Module):
    class Block(nn.Module):
        def __init__(self, padded):
            super().__init__()
            self.norm1 = nn.LayerNorm(HIDDEN)
            self.mix = nn.Conv1d(HIDDEN, HIDDEN, 3, groups=HIDDEN, padding=2,
                                 padding_mode="replicate" if padded else "zeros")
            self.shift = nn.Conv1d(HIDDEN, HIDDEN, 2, padding=1, bias=False,
                                   padding_mode="reflect" if padded else "zeros")
            self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
            self.proj = nn.Linear(HIDDEN, HIDDEN)
            self.norm2 = nn.LayerNorm(HIDDEN)
            self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
            self.down = nn.Linear(4 * HIDDEN, HIDDEN)

        def forward(self, x):
            b, t, h = x.shape
            y = self.norm1(x).transpose(1, 2)
            y = self.shift(self.mix(y)[..., :t])[..., :t].transpose(1, 2)
            q, k, v = self.qkv(y).split(h, 2)
            q, k, v = (z.view(b, t, HEADS, h // HEADS).transpose(1, 2)
                       for z in (q, k, v))
            scores = q @ k.transpose(-1, -2) / (h // HEADS) ** 0.5
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
            a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h)
            x = x + self.proj(a)
            return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))

    def __init__(self, padded=False):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.blocks = nn.ModuleList([self.Block(padded) for _ in range(2)])
        self.norm = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def export(model, inputs, name, input_names, output_names, training=False):
    model.eval()
    with torch.no_grad():
        outputs = model(*inputs)
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    torch.onnx.export(model, inputs, os.path.join(out, name + ".onnx"),
                      input_names=input_names, output_names=output_names,
                      opset_version=17, training=mode,
                      do_constant_folding=not training)
    if not isinstance(outputs, tuple):
        outputs = (outputs,)
    return [o.numpy() for o in outputs]


def train(data, steps, lr, padded):
    from torch_losses import write_adamw_losses
    write_adamw_losses(lambda: ShortConvLM(padded), data, steps, lr, BATCH, SEQ,
                       VOCAB, out)


if len(sys.argv) in (6, 7) and sys.argv[2] == "--train":
    train(sys.argv[3], int(sys.argv[4]), float(sys.argv[5]),
          sys.argv[6:] == ["padconv"])
    sys.exit(0)

torch.manual_seed(0)
lm = ShortConvLM()
tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
np.save(os.path.join(out, "tokens.npy"), tokens.numpy())
(logits,) = export(lm, (tokens,), "shortconv", ["input_ids"], ["logits"],
                   training=True)
np.save(os.path.join(out, "shortconv_logits.npy"), logits)
torch.manual_seed(0)
(logits,) = export(ShortConvLM(padded=True), (tokens,), "padconv", ["input_ids"],
                   ["logits"], training=True)
np.save(os.path.join(out, "padconv_logits.npy"), logits)

pixels = torch.randn(2, 3, 36, 36)
np.save(os.path.join(out, "vit_pixels.npy"), pixels.numpy())
(logits,) = export(ViT(), (pixels,), "vit", ["pixels"], ["logits"])
np.save(os.path.join(out, "vit_logits.npy"), logits)

inputs = (torch.randn(2, 8, 12), torch.randn(2, 6, 7), torch.randn(2, 4, 9, 7),
          torch.randn(1, 3, 4, 8, 12))
results = export(Convs(), inputs, "convs", ["audio", "sequence", "image", "video"],
                 ["stem", "causal", "grouped", "tubelets"])
for i, (x, y) in enumerate(zip(inputs, results)):
    np.save(os.path.join(out, "conv_inputs_%d.npy" % i), x.numpy())
    np.save(os.path.join(out, "conv_outputs_%d.npy" % i), y)
