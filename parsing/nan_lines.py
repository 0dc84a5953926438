"""A loss or a gradient norm that went NaN or infinite, in the words trainers print it.

Pure functions over one message (parsing.trainer_log reads every single line through
:func:`nan_text`). A NaN on a progress line is a value read, at whatever level the logger prints
every step: the parser does not quiet it by the line's level.
"""

from __future__ import annotations

import re

_NAN = re.compile(
    # Lightning: "The loss returned in `training_step` is tensor(nan, ...)" (a longer gap, a tensor repr)
    # a loss by any name ("loss", "loss_box_reg_stage0", "val_loss"), as a dict of a detector's losses prints it
    # a signed NaN too (Caffe's and darknet's C printf: "loss = -nan"), and Keras's bar glued to the
    # next epoch's header when the bar's line was not ended ("loss: nanEpoch 1/1000")
    # (round 22) infinity spelled out, as Java's and JavaScript's number printing gives it ("Loss is Infinity.", BigDL)
    r"\b(?:\w*loss\w*|grad(?:ient)?[_ ]norm)\b[^\n]{0,40}?(?:\bis\b|=|:)\s*(?:tensor\()?[+-]?(?:nan|inf(?:inity)?)(?:\b|(?=Epoch \d))"
    r"|\b(?:detected|found|encountered)\b[^\n]{0,24}?\b(?:nan|inf)\b"
    # a value that became NaN, in the program's own sentence ("grad_norm became NaN. Stopping training.", round 17)
    r"|\b(?:\w*loss\w*|grad(?:ient)?[_ ]norm)\s+(?:became|becomes|went|turned|has become|has gone|is now)\s+[+-]?(?:nan|inf)\b"
    # tensorboard's "NaN or Inf found in input tensor." (the logged loss went non-finite)
    r"|\b(?:nan|inf)\b(?: or (?:nan|inf)\b)? (?:found|detected|encountered)\b"
    r"|\b(?:nan|inf)\s+(?:in\s+(?:\w+\s+)?)?(?:loss|grad(?:ient)?[_ ]norm)\b"
    # clip_grad_norm_'s "Non-finite norm encountered" / "The total norm of order 2.0 ... is non-finite"
    # MXNet's Speedometer and gluon-cv's batch lines name each metric ("[Epoch 0][Batch 1], ... SmoothL1=nan"):
    # after a batch every metric averages real samples, so a NaN one is the training's numbers
    r"|\bepoch\W{0,2}\d+\W{1,3}batch\W{0,2}\d+\b[^\n]*?\b\w+=[+-]?nan\b"
    r"|\bnan (?:loss|detected)\b|non-finite (?:loss|value|(?:total |gradient |grad )?norm)\b|\btotal norm of order [\d.]+ .{0,60}\bis non-finite",
    re.IGNORECASE,
)
# nanoGPT and similar loops print "iter 110: loss nan, time ..." (no separator before the value).
# A loss by any name, bare too ("discrim_loss nan"); a loss tensor printed bare: "loss tensor(nan, device='cuda:0', ...)".
_NAN_BARE = re.compile(r"\b(?:\w*loss|grad(?:ient)?[_ ]norm)\s+(?:tensor\()?(?:nan|[+-]?inf)\b", re.IGNORECASE)
_NAN_CONTEXT = re.compile(r"loss|norm|detect|found|encounter|finite|batch")
# Every _NAN / _NAN_BARE match holds "nan", or "inf" / "infinity" ending a word: the "inf" of every "INFO" does not.
_NAN_OR_INF = re.compile(r"nan|inf(?:inity)?\b")
# A value logged as NaN where the logger prints a step's numbers: a key-value table row of a loss-like key
# (OpenAI baselines' HumanOutputFormat, guided-diffusion: "| loss | nan |", "| mse | nan |"; not an RL
# run's episode means, "| ep_rewmean | nan |", NaN until an episode ends),
# a step followed by its columns of value lists (DeepXDE's display: "2000      [nan]         [nan]"), and
# TensorFlow's summary op refusing a NaN tensor ("Nan in summary histogram for: lstm/kernel_0",
# tensorflow/core/kernels/summary_op.cc InvalidArgument: the weights went NaN).
_NAN_LOGGED = re.compile(
    # (rlpyt's tabular logger leaves the middle and the closing bar out: "| model_loss/Average      nan")
    r"^\|\s*[\w/.\-]*(?:loss|mse|mae|nll|vb|kl|elbo|grad_?norm|ppl|perplexity)[\w/.\-]*\s*(?:\|\s*)?[+-]?nan\s*(?:\|\s*)?$"
    r"|^\s*\d+\s+\[[^\]]*\bnan\b[^\]]*\]\s+\["
    r"|\bNan in summary histogram for\b"
    # (round 23) Caffe's debug_info, a blob's mean absolute value per layer and pass ("[Backward] Layer relu3_1, param blob 0
    # diff: nan", "[Forward] Layer conv1, top blob conv1 data: nan", "[Update] Layer fc8, param 0 data: 0.01; diff: nan"):
    # a NaN there is the net's own numbers, at whatever level glog prints it (docs/design.md §9)
    r"|\[(?:Forward|Backward|Update)\] Layer \S+, (?:(?:top|bottom|param) blob|param) \S+ (?:data: [^;]+; )?(?:data|diff): [+-]?nan\b"
    # (round 27) a NaN scalar tensor printed alone on its line ("tensor(nan, device='cuda:0')", print(loss) in a training
    # loop): the loop's one number per step, torch's repr of it (device, dtype, grad_fn as torch writes them)
    r"|^\s*tensor\(nan(?:, device='[\w:]+')?(?:, dtype=torch\.\w+)?(?:, grad_fn=<\w*>)?\)\s*$"
    # (round 43) a detector trainer's progress row under its table's header ("Epoch GPU_mem box_loss cls_loss dfl_loss
    # Instances Size", the YOLO trainers of ultralytics and yolov5/v7): the epoch out of the total, the device memory,
    # the step's loss columns, the batch's instance count and image size, then its progress bar ("91/300  17G  nan  nan
    # nan  2  640: 100%|..."). A NaN among the loss columns is the training's loss; a finite row is not read
    r"|^\s*(?:\d+\s+)?\d+/\d+\s+[\d.]+G\s+(?:[-+\d.e]+\s+)*[+-]?nan\s+(?:(?:[-+\d.e]+|[+-]?nan)\s+)*\d+\s+\d+:\s+\d+%\|",
    re.IGNORECASE,
)
# Megatron pads its progress line's counter ("iteration     6150/  500000"): any run of blanks, or up
# to three other non-digits ("step: 5", "Step #5", "iter=5").
_STEP = re.compile(r"\b(?:step|iter(?:ation)?)\b(?:\s+|\D{0,3})(\d+)", re.IGNORECASE)


def nan_text(msg: str) -> bool:
    """Does the line report a non-finite loss or gradient norm? Cheap words first: most lines hold none."""
    low = msg.lower()
    if "nan" in low and _NAN_LOGGED.search(msg):
        return True
    if not (("nan" in low or "non-finite" in low or "inf" in low and _NAN_OR_INF.search(low)) and _NAN_CONTEXT.search(low)):
        return False
    # An fp16 scaler's overflow note names inf / nan gradients it skips, no loss: only what the line
    # says before it counts (a progress bar's "loss=nan" the note was glued after, issue 54 round 13).
    head = msg[:low.index("overflow")] if "overflow" in low else msg
    return bool(_NAN.search(head) or _NAN_BARE.search(head))


def step_of(msg: str) -> int | None:
    """The step or iteration the line names, if any."""
    sm = _STEP.search(msg)
    return int(sm.group(1)) if sm else None
