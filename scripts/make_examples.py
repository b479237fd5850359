"""Regenerate the example documents in examples/ (deterministically) and check what the parser sees.

    .venv/bin/python scripts/make_examples.py

- python-language-reference.docx: chapters of the Python Language Reference, taken from the
  documentation that ships with the interpreter (pydoc_data.topics, PSF License Version 2).
  Its exact text depends on the Python minor version running this script (3.11 for the committed file).
- kafka-overview.pdf: an original English essay on logs and idempotent consumers.
- chinese-essay.txt: an original Chinese essay (UTF-8) on a city and its river.
"""

from __future__ import annotations

import pydoc_data.topics
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.documents when run as a script

from docsum_parser.extract import extract_text  # noqa: E402
from tests.documents import Block, make_docx, make_pdf  # noqa: E402

EXAMPLES = ROOT / "examples"

# ------------------------------------------------------------------------------ Python reference

# Non-overlapping reference chapters (several pydoc topics are sub-sections of others), in reading
# order; together roughly 145k characters of source text.
REFERENCE_TOPICS = [
    "execmodel",
    "import",
    "compound",
    "types",
    "assignment",
    "comparisons",
    "calls",
    "strings",
]
_UNDERLINE_LEVEL = {"*": 1, "=": 2, "-": 3, "~": 4}
_UNDERLINE = re.compile(r"([*=\-~])\1{2,}")


def topic_blocks(text: str) -> list[Block]:
    """Turn one pydoc topic (reST-like plain text) into heading and paragraph blocks."""
    blocks: list[Block] = []
    for raw in re.split(r"\n\s*\n", text.strip("\n")):
        lines = raw.split("\n")
        if len(lines) == 2 and _UNDERLINE.fullmatch(lines[1].strip()):
            blocks.append(("heading", _UNDERLINE_LEVEL[lines[1].strip()[0]], lines[0].strip()))
        elif all(line.startswith(" ") for line in lines) and not lines[0].lstrip().startswith("* "):
            # Grammar rules and code samples: keep their lines and indentation.
            blocks.append(("paragraph", raw.rstrip()))
        else:
            # Reflow wrapped prose and list items; the docs were wrapped after hyphens ("built-\nin").
            paragraph = ""
            for line in (line.strip() for line in lines):
                paragraph += line if paragraph.endswith("-") or not paragraph else " " + line
            blocks.append(("paragraph", paragraph))
    return blocks


def build_reference_docx() -> bytes:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    blocks: list[Block] = [
        ("heading", 0, "The Python Language Reference: Selected Chapters"),
        (
            "paragraph",
            f"This document collects chapters of the Python Language Reference from the Python "
            f"{version} documentation, as shipped with the interpreter in the pydoc_data.topics "
            "module. Copyright Python Software Foundation; licensed under the Python Software "
            "Foundation License Version 2.",
        ),
    ]
    for topic in REFERENCE_TOPICS:
        blocks += topic_blocks(pydoc_data.topics.topics[topic])
    return make_docx(blocks)


# ---------------------------------------------------------------------------------- Kafka essay

# Original text written for this project. Latin-1 only (the PDF uses a core font): plain quotes.
KAFKA_ESSAY_PAGES = [
    """Logs, Offsets and Idempotence: Why Event-Driven Systems Survive Crashes

Every system that does real work will eventually crash in the middle of it. A process is killed during a deployment, a virtual machine disappears, or a network partition separates a service from its database for thirty seconds. The interesting question is not whether this happens but what state the system is in afterwards. In a traditional request-driven design the honest answer is often "it depends": some rows were written, some emails were sent, and a person has to reconstruct the rest from log files. Event-driven architecture, built around a durable log and consumers that can safely repeat their work, offers a more satisfying answer. After a crash, the system continues from where the log says it was, and repeating a step does no harm.

The log as the source of truth

At the heart of a system like Apache Kafka is an append-only log. Producers add records to the end and nothing is ever modified in place. Each record receives an offset, a position in its partition that never changes. Because the log is replicated across several brokers and written to disk before it is acknowledged, a record that has been accepted survives the loss of any single machine. This changes how we think about state. Instead of a database row being the primary record of what happened, the event is. Tables, caches and search indexes become derived views that can be rebuilt by reading the log again from the beginning.""",  # noqa: E501
    """Consumers and offsets

A consumer reads records in order and periodically commits its offset, a note that says "I have processed everything up to here". When a consumer restarts, it asks for its last committed offset and resumes from there. The crucial detail is the order of two operations: doing the work and committing the offset. If a consumer commits first and then crashes before finishing the work, that record is lost, because on restart the consumer believes it is already done. If it does the work first and commits afterwards, a crash between the two means the record is processed again. The second failure is far easier to live with, which is why most systems choose it. This is what people mean by at-least-once delivery.

Why duplicates are inevitable

At-least-once delivery means that every consumer must expect to see some records twice. Duplicates also appear for other reasons. A producer retries a send after a timeout even though the first attempt actually succeeded. A consumer group rebalances, and a partition moves to another instance before the previous owner committed its progress. It is tempting to try to eliminate duplicates entirely, and Kafka does offer idempotent producers and transactions that help within the boundaries of Kafka itself. But as soon as a consumer writes to an external database, calls another service or sends a message to a person, the broker can no longer promise exactly-once effects. The responsibility moves to the consumer.""",  # noqa: E501
    """Idempotent consumers

An operation is idempotent if doing it twice has the same effect as doing it once. Setting a value is idempotent; adding to a counter is not. The practical technique is to give every unit of work a stable identity and to record that identity together with the result. A service that summarizes documents, for example, can store each summary under a key made of the document identifier and the version of its input. When the same event arrives again, the write either finds the existing row and does nothing, or replaces it with an identical value. In a relational database this is often a single statement: an insert guarded by a unique constraint, with a clause that ignores conflicts. What matters is that the check and the write happen atomically, so two copies of the same event handled at the same moment cannot both slip through.

Putting the pieces together

Consider a pipeline in which one service accepts uploads, a second extracts text, a third splits the text into chunks, a fourth writes summaries and a fifth merges them. Each service reads from one topic and writes to the next. If the summarizer crashes halfway through a batch, nothing has to be repaired by hand. When it restarts, it reads again the chunks whose offsets were never committed, skips the ones whose results are already stored, recomputes the rest and publishes its results once more. Downstream, the merger receives a few duplicate events and ignores them, because it has already recorded those chunk identifiers. The end state is the same as if the crash had never happened, only a little later.""",  # noqa: E501
    """The outbox problem

One subtle trap remains. A service that writes to its database and then publishes an event can crash between the two steps: the database says the work is done, but nobody downstream ever hears about it. A common remedy is the transactional outbox, in which the event is written to an outbox table in the same database transaction as the state change, and a separate relay copies rows from that table to the log. Another approach reverses the dependency and makes the log the only place a service writes to, deriving its database from its own events. Either way the principle is the same: there must be a single atomic step after which the outcome is certain, and everything else must be safe to repeat.

Poison messages and honest failures

Crash safety is not only about machines failing. Sometimes a single record cannot be processed at all: a corrupted file, an unexpected encoding, a document far larger than anyone planned for. If a consumer keeps retrying such a record, it blocks every record behind it in the same partition. A well-behaved consumer distinguishes transient errors, which deserve a retry with a growing delay, from permanent ones, which should be recorded as failures with a clear explanation and then skipped. A dead-letter topic or a failed status in a database gives operators a place to look, while the rest of the stream keeps flowing.

What this buys us

Designing around a durable log and idempotent consumers does not make failures disappear, but it makes them boring. Deployments can restart services at any moment. Scaling out means adding consumers to a group and letting partitions move. Recovering from a bug can be as simple as fixing the code and replaying the affected part of the log. The price is discipline: every handler must be written on the assumption that it will see the same input again, and every side effect must be idempotent or guarded by a record of what has already been done. In return the system gains a property that is hard to achieve any other way. After any crash it knows exactly where it was, and it can safely find its way back.""",  # noqa: E501
]

# ---------------------------------------------------------------------------------- 城市与河流

# Original text written for this project.
CHINESE_ESSAY = """城市与河流

我出生的城市沿着一条河展开。小时候，我以为所有的城市都应该有一条河，就像每个人都应该有一个名字一样。后来去过许多地方，才知道并非如此：有的城市建在平原上，四面八方都是路；有的城市挤在山谷里，只有一条干涸的沟。可是每当我在陌生的街道上迷路，心里总会下意识地寻找水的方向，仿佛只要找到了河，就能找到回家的路。

河流是城市最早的道路。在铁路和公路出现之前，货物和消息都要靠水来运送。粮食从上游的田野顺流而下，布匹和盐从下游逆水而上，码头边于是有了仓库、客栈和茶馆，有了讨价还价的声音和彻夜不灭的灯火。一座城市最初的形状，往往就是河岸的形状。老城的街巷之所以弯弯曲曲，并不是因为古人不懂规划，而是因为他们顺着水走，水怎么弯，路就怎么弯。

在这座城市的方言里，很多地名都和水有关：有叫“埠”的，有叫“湾”的，有叫“渡”的，也有叫“闸”的。今天，这些地方有的已经离河很远，甚至找不到一滴水，可是名字还留着，像一枚枚小小的化石，提醒人们这里曾经是什么样子。每当我在地铁站里听到这些站名，总会忍不住想象几百年前的景象：渡船靠岸，挑夫上岸，一天的生意就这样开始了。

桥是河流送给城市的另一件礼物。有了桥，两岸的人才能来往，集市才能从一边扩展到另一边。我们那里的桥各有各的脾气：石桥结实而沉默，木桥走上去会吱呀作响，铁桥建得最晚，却最先被人们嫌弃太丑。小时候我喜欢趴在桥栏上数船，一艘、两艘、三艘，数着数着就忘了时间。桥下的水总是在流，桥上的人也总是在走，只有桥一直站在那里，像一位耐心的看门人。

我对那条河最早的记忆，是夏天的傍晚。父亲下班以后，常常带我到码头边乘凉。那时候的河面很宽，对岸的灯光倒映在水里，被来来往往的小船划成一片一片的碎金。卖西瓜的小贩把瓜泡在河水里，捞上来切开，凉得让人打哆嗦。我最喜欢听船工们吆喝，他们的号子又长又慢，好像能一直传到下游去。那时我并不知道，这样的夜晚很快就会消失。

河边的早市是我童年最热闹的地方。天还没亮，菜农就挑着担子从渡口上岸，把青菜、萝卜和刚摘的莲蓬摆满了石阶。卖鱼的摊子前总是围着一圈人，鱼在木盆里扑腾，溅起的水花打湿了买菜人的鞋子。母亲一边挑菜，一边和熟识的摊主聊天，问他们上游的收成，也问他们家里的老人和孩子。那时候我觉得，整座城市的消息都是顺着河水流到这里来的。

河流也是城市的记忆。我家附近有一座石桥，桥栏上刻着几行已经模糊的字，据说记录的是某一年的大水。老人们讲起那场洪水，总是先叹一口气，再说起谁家的房子被冲走了，谁家的孩子被邻居从屋顶上救了下来。那些故事没有写进正式的史书，却在茶馆和饭桌上一代一代地流传。对他们来说，河既是养育人的母亲，也是脾气难测的邻居。人们敬它，怕它，也离不开它。

后来，城市变大了，河却变窄了。为了修路和盖楼，一些支流被填平，一些河道被改成了暗渠，盖上水泥板，变成了停车场和菜市场。人们不再需要河来运货，也不再到河边洗衣服，河于是慢慢从日常生活里退了出去。有好些年，我家门前那条河又黑又臭，夏天的傍晚没有人愿意在岸边散步。大人们提起它时，语气里带着一种说不出的尴尬，好像在谈论一位落魄的亲戚。

那几年，河边的工厂越来越多。染坊把五颜六色的废水直接排进河里，有时候上午是蓝色的，下午又变成了红色。孩子们觉得新奇，大人们却开始发愁。渔民的网越来越空，最后干脆不再下河，改行去工地上打零工。我的一位同学家里世代打鱼，他父亲在河边坐了整整一个下午，回来以后把渔网挂在墙上，再也没有取下来过。

转变是从一场争论开始的。有人主张把最后一段河道也盖起来，修成一条宽阔的马路；也有人坚持，一座城市如果连一条干净的河都留不住，再多的高楼也只是空壳。争论持续了好几年，报纸上、社区里，甚至菜市场的摊位前，都有人在说这件事。最后，城市选择了另一条路：截住沿岸的污水管，清理河底的淤泥，拆掉一部分违章建筑，把堤岸改造成可以步行的绿道。

工程完成以后，河并没有立刻变成人们想象中的样子。水依然有些浑浊，岸边新种的树也还很矮。可是慢慢地，一些东西回来了。先是早晨跑步的人，然后是傍晚遛狗的人，再后来是周末带着孩子来看鱼的父母。有一年春天，我在桥下看见了一群白鹭，它们站在浅水里，一动不动，好像在等待什么。旁边一位老人告诉我，他已经有三十年没在这里见过白鹭了！

很少有人注意到那些默默守护河流的人。每天清晨，都有一位环卫工人撑着小船，在河面上打捞漂浮的塑料袋和落叶；每个周末，附近中学的学生会来测量水质，把数据记在本子上，贴在社区的公告栏里。还有一位退休的中学老师，坚持十几年给河边的树挂上名牌，写明它们的名字和习性。正是这些琐碎的小事，让一条河重新变成了大家的河。

后来我在别的城市生活，也见过各种各样的河。有的河穿过繁华的商业区，两岸是玻璃幕墙和霓虹灯，夜里游船载着游客来来回回；有的河藏在老街的背后，窄得只能容下一条小船，岸边的人家把衣服晾在水面上方。每一条河都有自己的性格，也都在悄悄地影响着沿岸居民的脾气。住在急流旁边的人说话直来直去，住在缓水旁边的人做事不紧不慢。这话虽然没有什么科学根据，却常常让我觉得有几分道理。

我常常想，河流和城市之间，究竟是谁在塑造谁？表面上看，是人修堤、挖渠、建桥，把河流安排得服服帖帖；可是从更长的时间来看，是河流决定了城市在哪里出现，向哪个方向生长，又在哪些年份遭遇灾难。人们以为自己驯服了河，其实只是和它达成了暂时的和解。一旦忘记了这一点，河就会用洪水或者沉默来提醒我们。

这些年，天气变得越来越难以预料。有时候整个夏天滴雨不下，河床露出干裂的泥土；有时候一夜暴雨，河水就漫上了台阶，淹没了刚刚修好的步道。城市开始重新学习和河流相处的办法：在低洼的地方修建可以蓄水的公园，把一些硬邦邦的水泥堤岸改回缓坡和湿地，给河流留出涨落的空间。人们终于明白，与其和河流争地，不如给它一点余地。

一条健康的河，对城市意味着什么？它意味着夏天的风会凉快一些，暴雨来临时街上的积水会少一些，孩子们可以在岸边认识芦苇、蜻蜓和青蛙。更重要的是，它给了城市一个可以停下来的地方。在一个人人都匆匆忙忙的地方，河岸是少数不要求你消费、也不催促你离开的公共空间。你可以坐在台阶上发呆，可以和陌生人聊几句天气，也可以什么都不做，只是看着水慢慢地流过去。

有人说，看一座城市，要看它的博物馆和图书馆；我却觉得，看一座城市，更要看它的河。河里的水清不清，岸边的人多不多，老人是不是愿意在那里下棋，孩子是不是敢在那里奔跑，这些都比宣传册上的口号更真实。一条河就像一面镜子，照出城市的过去，也照出它对未来的态度。

当然，并不是所有的问题都已经解决。上游的工厂偶尔还会偷偷排污，雨季的时候，老城区依然会被淹。新修的绿道吸引了游客，也带来了噪音和垃圾，附近的房租跟着涨了起来，一些在河边住了几十年的老住户不得不搬走。河流重新回到了城市的中心，可是谁有权利住在河边、享受河流，又成了一个新的问题。一座城市如何对待它的河，往往也反映了它如何对待生活在其中的普通人。

去年夏天，我带着女儿回到故乡。她在河边的台阶上坐了很久，看水里的小鱼游来游去，又问我河水最后会流到哪里去。我告诉她，这条河会汇入一条更大的江，再流进大海。她想了想，问我：那河水岂不是一直在离开家吗？我一时不知道该怎么回答。也许河流和人一样，总要离开出发的地方，才能明白自己从哪里来。

如今我已经离开那座城市很多年了。每次回去，我都会沿着河走一段路，从石桥走到旧码头，再从旧码头走回来。两岸的房子换了一批又一批，店铺的招牌也一年比一年陌生，只有河还在那里，不急不慢地流着。我渐渐明白，城市之所以值得怀念，并不只是因为那些街道和建筑，而是因为有一些东西比我们活得更久。河流就是这样的东西。它见过这座城市的童年，也会看见它的未来。
"""

# ----------------------------------------------------------------------------------------- main

_HAN = re.compile(r"[\u4e00-\u9fff]")


def main() -> None:
    outputs = {
        "python-language-reference.docx": build_reference_docx(),
        "kafka-overview.pdf": make_pdf(KAFKA_ESSAY_PAGES),
        "chinese-essay.txt": CHINESE_ESSAY.encode("utf-8"),
    }
    EXAMPLES.mkdir(exist_ok=True)
    for name, data in outputs.items():
        (EXAMPLES / name).write_bytes(data)
        result = extract_text(data, name)
        extra = f", {result.pages} pages" if result.pages else ""
        han = len(_HAN.findall(result.text))
        extra += f", {han} Chinese characters" if han else ""
        print(f"{name}: {len(data):,} bytes -> {len(result.text):,} chars of {result.format}{extra}")

    # The examples exist to exercise chunking and merging at realistic sizes; fail loudly if an
    # edit (or another Python version's docs) pushes them out of the intended ranges.
    reference = extract_text(outputs["python-language-reference.docx"], "x.docx").text
    kafka = extract_text(outputs["kafka-overview.pdf"], "x.pdf")
    chinese = extract_text(outputs["chinese-essay.txt"], "x.txt").text
    assert 110_000 <= len(reference) <= 160_000, len(reference)
    assert 6_000 <= len(kafka.text) <= 9_000 and 3 <= (kafka.pages or 0) <= 6, (len(kafka.text), kafka.pages)
    assert 2_500 <= len(_HAN.findall(chinese)) <= 4_000, len(_HAN.findall(chinese))


if __name__ == "__main__":
    main()
